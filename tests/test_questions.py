"""copier.yml: defaults, derived names, validators and choices; copying needs no --trust.

pytest tests/test_questions.py
"""

import pytest
import yaml

from conftest import REPO, render


def answers(project) -> dict:
    return yaml.safe_load((project / ".copier-answers.yml").read_text())


def test_copy_needs_no_trust(tmp_path):
    config = yaml.safe_load((REPO / "copier.yml").read_text())
    assert "_tasks" not in config and "_jinja_extensions" not in config
    project = render(tmp_path / "p")  # render() passes unsafe=False
    assert answers(project)["package_name"] == "shape_classifier"


@pytest.mark.parametrize(
    ("model_name", "module"),
    [
        ("TinyResNet", "tiny_resnet"),
        ("SimpleCNN", "simple_cnn"),
        ("MobileNetV2", "mobilenet_v2"),
        ("Unet", "unet"),
        ("GPT2Model", "gpt2_model"),
    ],
)
def test_model_module_is_snake_case(tmp_path, model_name, module):
    project = render(tmp_path / "p", model_name=model_name)
    assert answers(project)["model_module"] == module
    assert f"class {model_name}(nn.Module)" in (project / "shape_classifier" / f"{module}.py").read_text()


def test_every_module_of_the_project_is_a_reserved_name(tmp_path):
    """A package or model module named like one of the project's modules would shadow it on import."""
    config = yaml.safe_load((REPO / "copier.yml").read_text())
    reserved = set(yaml.safe_load(config["reserved_module_names"]["default"]))
    project = render(tmp_path / "p")
    package = answers(project)["package_name"]
    modules = {path.stem for path in (project / package).glob("*.py")} - {"__init__", answers(project)["model_module"]}
    scripts = {path.stem for path in project.glob("*.py")}
    assert modules | scripts | {"tests"} <= reserved, sorted((modules | scripts) - reserved)


def test_package_name_derives_from_project_name(tmp_path):
    project = render(tmp_path / "p", project_name="My Cool-Model 2")
    assert answers(project)["package_name"] == "my_cool_model_2"
    assert (project / "my_cool_model_2" / "layers.py").is_file()


LICENSES = [("MIT", "MIT License"), ("Apache-2.0", "Apache License"), ("BSD-3-Clause", "BSD 3-Clause")]


@pytest.mark.parametrize(("license_", "first_line"), LICENSES)
def test_licenses(tmp_path, license_, first_line):
    project = render(tmp_path / "p", license=license_, author_name="Ada Lovelace")
    text = (project / "LICENSE").read_text()
    assert first_line in text
    assert f'license = "{license_}"' in (project / "pyproject.toml").read_text()


def test_no_license(tmp_path):
    project = render(tmp_path / "p", license="none")
    assert not (project / "LICENSE").exists()
    assert "license =" not in (project / "pyproject.toml").read_text()


BAD_ANSWERS = [
    ({"project_name": "  "}, "project_name must not be empty"),
    ({"project_name": 'Say "hi"'}, "must not contain double quotes"),
    ({"package_name": "My-Package"}, "package_name must be a lowercase Python identifier"),
    ({"package_name": "2fast"}, "package_name must be a lowercase Python identifier"),
    ({"package_name": "class"}, "is a Python keyword"),
    ({"package_name": "json"}, "would shadow the module"),
    ({"package_name": "torch"}, "would shadow the module"),
    ({"package_name": "torchvision"}, "would shadow the module"),
    ({"package_name": "layers"}, "would shadow the module"),
    ({"package_name": "a" * 33}, "package_name must be at most 32 characters"),
    ({"model_name": "A" + "b" * 24}, "model_name must be at most 24 characters"),
    ({"model_module": "m" * 33}, "model_module must be at most 32 characters"),
    ({"model_name": "tiny_resnet"}, "model_name must be a class name in CapWords"),
    ({"model_name": "CNN"}, "at least one lowercase letter"),
    ({"model_name": "Layers"}, "collides with a module"),
    ({"model_name": "Data"}, "collides with a module"),
    ({"model_name": "Shapes"}, "collides with a module"),
    ({"model_name": "Samplers"}, "collides with a module"),
    ({"model_module": "train"}, "collides with a module"),
    ({"model_module": "shape_classifier"}, "must differ from package_name"),
    ({"author_email": "nobody"}, "author_email must look like"),
    ({"description": "two\nlines"}, "description must be one line"),
]


@pytest.mark.parametrize(("data", "message"), BAD_ANSWERS, ids=[str(d) for d, _ in BAD_ANSWERS])
def test_bad_answers_are_refused_and_leave_nothing(tmp_path, data, message):
    with pytest.raises(ValueError, match=message):
        render(tmp_path / "bad", **data)
    assert not (tmp_path / "bad").exists()


UNKNOWN_CHOICES = [("multi_gpu", "horovod"), ("python_version", "3.8"), ("license", "WTFPL"), ("ci", "jenkins")]


@pytest.mark.parametrize(("question", "value"), UNKNOWN_CHOICES)
def test_unknown_choices_are_refused(tmp_path, question, value):
    with pytest.raises(ValueError, match=f"Invalid choice for '{question}'"):
        render(tmp_path / "bad", **{question: value})
    assert not (tmp_path / "bad").exists()
