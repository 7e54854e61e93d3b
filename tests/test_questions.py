"""copier.yml: defaults, derived names, validators and choices; copying needs no --trust.

pytest tests/test_questions.py
"""

import ast
import json
import re
import subprocess
import sys
from pathlib import Path

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
        ("ResNet3D", "resnet3d"),  # an acronym after a digit stays with it
        ("NAFNet", "nafnet"),  # Net after an acronym, too
        ("MobileViT", "mobile_vit"),  # a lone last capital stays with its word
    ],
)
def test_model_module_is_snake_case(tmp_path, model_name, module):
    project = render(tmp_path / "p", model_name=model_name)
    assert answers(project)["model_module"] == module
    assert f"class {model_name}(nn.Module)" in (project / "shape_classifier" / f"{module}.py").read_text()


def bound_names(project: Path) -> tuple[set[str], set[str], set[str]]:
    """(every name its Python files and notebooks import, define or use; the names its notebooks assign or import;
    the top-level modules it imports)."""
    notebooks = []
    for path in project.rglob("*.ipynb"):
        cells = json.loads(path.read_text())["cells"]
        notebooks.append("\n".join("".join(cell["source"]) for cell in cells if cell["cell_type"] == "code"))
    names, assigned, modules = set(), set(), set()
    for source in [*(path.read_text() for path in project.rglob("*.py")), *notebooks]:
        for node in ast.walk(ast.parse(source)):
            if isinstance(node, (ast.Import, ast.ImportFrom)):
                bound = {alias.asname or alias.name.split(".")[0] for alias in node.names}
                names |= bound
                assigned |= bound if source in notebooks else set()
                if isinstance(node, ast.Import):
                    modules |= {alias.name.split(".")[0] for alias in node.names}
                elif node.level == 0:
                    modules.add(node.module.split(".")[0])
            elif isinstance(node, (ast.ClassDef, ast.Name)):
                names.add(node.name if isinstance(node, ast.ClassDef) else node.id)
                if source in notebooks and isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
                    assigned.add(node.id)
    return names, assigned, modules


@pytest.mark.parametrize("task", ["classification", "restoration"])
def test_every_name_the_project_binds_is_reserved(tmp_path, task):
    """A package or model module named like a module the project has or imports (its tests' too) or a notebook's
    name (the notebooks import the model module), or a model class named like a class the project imports or
    defines, would shadow it."""
    config = yaml.safe_load((REPO / "copier.yml").read_text())
    reserved = {kind: set(yaml.safe_load(config[f"reserved_{kind}_names"]["default"])) for kind in ("module", "class")}
    modules, classes = reserved["module"], reserved["class"]
    project = render(tmp_path / "p", task=task, model_name="Zqmodel")
    package = answers(project)["package_name"]
    files = {path.stem for path in [*(project / package).glob("*.py"), *project.glob("*.py")]} - {"__init__", "zqmodel"}
    files |= {path.stem for path in (project / "tests").rglob("*.py")}  # test_train: a package of that name shadows it
    init = ast.parse((project / package / "__init__.py").read_text())  # a model module pkg.reader_gone replaces it
    files |= {a.asname or a.name for node in init.body if isinstance(node, ast.ImportFrom) for a in node.names}
    files |= {node.name for node in init.body if isinstance(node, ast.FunctionDef)}
    names, notebook_names, imported = bound_names(project)
    wanted = files | notebook_names | {name.lower() for name in imported} | {"tests"}
    wanted = {name for name in wanted if re.fullmatch("[a-z][a-z0-9_]+", name)} - {package, "zqmodel"}
    assert wanted <= modules, sorted(wanted - modules)
    # The built-ins are in the list once; this checks the project's own names (the running Python's built-ins vary).
    capwords = {name for name in names if re.fullmatch("[A-Z][A-Za-z0-9]*[a-z][A-Za-z0-9]*", name)}
    assert capwords - {"Zqmodel", "ZqmodelConfig"} <= classes, sorted(capwords - classes)


def test_no_module_the_dependencies_load_is_a_free_name():
    """A package named like a module that torch, torch.compile or TensorBoard load (triton, sympy, google) shadows it:
    train.py would not start."""
    code = "import sys, torch, torchvision, torch._inductor.compile_fx\n"
    code += "from torch.utils.tensorboard import SummaryWriter\nprint(*sys.modules)"
    loaded = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split()
    tops = {name.split(".")[0].lower() for name in loaded} - set(sys.stdlib_module_names)
    config = yaml.safe_load((REPO / "copier.yml").read_text())
    reserved = set(yaml.safe_load(config["reserved_module_names"]["default"]))
    assert {name for name in tops if re.fullmatch("[a-z][a-z0-9_]+", name)} <= reserved


def test_package_name_derives_from_project_name(tmp_path):
    project = render(tmp_path / "p", project_name="My Cool-Model 2")
    assert answers(project)["package_name"] == "my_cool_model_2"
    assert (project / "my_cool_model_2" / "layers.py").is_file()
    project = render(tmp_path / "long", project_name="Retinal Fundus Image Quality Classifier")
    assert answers(project)["package_name"] == "retinal_fundus_image_quality_cla"  # cut to 32 characters


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
    ({"project_name": " Shape Classifier"}, "must not begin or end with a space"),
    ({"package_name": "test_train"}, "would shadow the module of that name"),  # tests/test_train.py
    ({"package_name": "torchcodec"}, "would shadow the module"),
    ({"model_name": "TestModel"}, "would be taken for a test file"),
    ({"model_name": "Display"}, "collides with a module"),  # the notebooks' IPython display
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
    ({"model_name": "Model"}, "collides with a module"),  # the notebooks' `model`
    ({"model_name": "UNet"}, "is a name the generated code already uses"),  # networks.py's, in restoration
    ({"model_name": "Image"}, "is a name the generated code already uses"),  # PIL's
    ({"model_name": "None"}, "is a name the generated code already uses"),
    ({"author_name": 'Ann "AJ" Lee'}, "author_name must not contain double quotes"),
    ({"author_email": 'a"b@example.com'}, "author_email must look like"),
    ({"description": "d" * 95}, "project_name and description must be at most 110 characters together"),
    ({"model_module": "train"}, "collides with a module"),
    ({"model_module": "shape_classifier"}, "must differ from package_name"),
    ({"author_email": "nobody"}, "author_email must look like"),
    ({"description": "two\nlines"}, "description must be one line"),
    ({"description": " . "}, "description must not be empty"),
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
