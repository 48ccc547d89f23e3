"""Helpers for tests that compare against Hugging Face's PyTorch models (import after `pytest.importorskip("torch")`)."""
import torch


def perturbed(model, seed):
    """``model`` with every weight moved by N(0, 0.05²) noise from ``seed``, in eval mode (fresh LayerNorms and
    zero biases would hide mapping mistakes)."""
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for parameter in model.parameters():
            parameter.add_(torch.randn(parameter.shape, generator=generator) * 0.05)
    return model.eval()
