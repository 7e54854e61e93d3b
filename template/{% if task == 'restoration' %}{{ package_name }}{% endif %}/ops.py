"""Pure tensor functions: no nn.Module, no state, no I/O."""

import torch
import torch.nn.functional as F

# The MSE is clamped here before the log, so identical images score 100 dB (for max_value 1), not +inf.
PSNR_MIN_MSE = 1e-10
# Wang et al. (2004): the constants that keep the SSIM ratios stable where means and variances are near 0.
SSIM_K1, SSIM_K2 = 0.01, 0.03


def _as_float_pair(pred: torch.Tensor, target: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Check that pred and target are (N, C, H, W) batches of one shape; return both in float32 (or float64)."""
    if pred.dim() != 4 or pred.shape != target.shape:
        raise ValueError(f"need two (N, C, H, W) batches of one shape, got {list(pred.shape)}, {list(target.shape)}")
    # bf16 and fp16 lack the precision for a squared error near 1e-5.
    dtype = torch.promote_types(torch.promote_types(pred.dtype, target.dtype), torch.float32)
    return pred.to(dtype), target.to(dtype)


def psnr(pred: torch.Tensor, target: torch.Tensor, max_value: float = 1.0) -> torch.Tensor:
    """Peak signal-to-noise ratio in dB of each image, 10 log10(max_value^2 / MSE): (N, C, H, W) twice -> (N,)."""
    pred, target = _as_float_pair(pred, target)
    mse = (pred - target).square().flatten(1).mean(dim=1)  # (N,)
    return 10.0 * torch.log10(max_value**2 / mse.clamp(min=PSNR_MIN_MSE))


def gaussian_kernel(size: int, sigma: float, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """A normalised 1-D Gaussian (size,), centred on the middle tap; ValueError for size < 1 or sigma <= 0."""
    if size < 1 or sigma <= 0:
        raise ValueError(f"gaussian_kernel needs size >= 1 and sigma > 0, got size={size}, sigma={sigma}")
    x = torch.arange(size, dtype=dtype) - (size - 1) / 2  # (size,) offsets from the centre
    kernel = torch.exp(-(x**2) / (2 * sigma**2))
    return kernel / kernel.sum()


def ssim(
    pred: torch.Tensor, target: torch.Tensor, max_value: float = 1.0, window: int = 11, sigma: float = 1.5
) -> torch.Tensor:
    """Structural similarity of each image (Wang et al., 2004): (N, C, H, W) twice -> (N,); 1 means identical.

    Gaussian-weighted statistics (std sigma) over window x window patches of the 'valid' region, per
    channel. ValueError unless both are 4-D of one shape with H and W >= window.
    """
    pred, target = _as_float_pair(pred, target)
    dtype, (_, channels, height, width) = pred.dtype, pred.shape
    if pred.device.type != "mps":  # float64 (MPS has none): on CUDA, cuDNN may run a float32 convolution in TF32,
        pred, target = pred.double(), target.double()  # its 10-bit mantissa 0.01 off in an image's SSIM
    if min(height, width) < window:
        raise ValueError(f"ssim needs images of at least {window}x{window} pixels, got {height}x{width}")
    g = gaussian_kernel(window, sigma, pred.dtype).to(pred.device)  # (window,)
    down = g.view(1, 1, window, 1).expand(channels, 1, -1, -1)  # (C, 1, window, 1): one per channel
    across = g.view(1, 1, 1, window).expand(channels, 1, -1, -1)  # (C, 1, 1, window)

    def blur(image: torch.Tensor) -> torch.Tensor:  # (N, C, H, W) -> (N, C, H', W'), each channel on its own
        # The window is separable: columns, then rows. A CPU convolution unfolds its input once per tap, so one
        # map at a time, 2 x window taps rather than window^2, keeps whole photographs within memory.
        return F.conv2d(F.conv2d(image, down, groups=channels), across, groups=channels)

    with torch.autocast(pred.device.type, enabled=False):  # autocast would run the convolution in bf16 or fp16
        mu_x, mu_y, xx, yy, xy = map(blur, (pred, target, pred * pred, target * target, pred * target))
    var_x, var_y, cov_xy = xx - mu_x * mu_x, yy - mu_y * mu_y, xy - mu_x * mu_y  # E[xy] - E[x] E[y]
    c1, c2 = (SSIM_K1 * max_value) ** 2, (SSIM_K2 * max_value) ** 2
    ssim_map = (2 * mu_x * mu_y + c1) * (2 * cov_xy + c2) / ((mu_x**2 + mu_y**2 + c1) * (var_x + var_y + c2))
    return ssim_map.flatten(1).mean(dim=1).to(dtype)  # (N,)
