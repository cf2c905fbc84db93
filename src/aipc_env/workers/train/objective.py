"""The Qwen-Image-Edit flow-matching training objective, shared by the engine's fit phase and verify's tiny run.
Standard library + torch only (it also runs inside any training env)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import torch

__all__ = ["flow_matching_loss"]


def flow_matching_loss(
    model: torch.nn.Module, inputs: dict[str, Any], generator: torch.Generator, mask_weight: float | None = None
) -> torch.Tensor:
    """x_t = (1-s) x0 + s noise; predict noise - x0 for the target tokens, with the control tokens appended along
    the sequence (as the pipelines do); optionally up-weight masked tokens.

    inputs: target [B, N, 64], controls [B, Nc, 64], prompt_embeds [B, L, D], prompt_mask [B, L] | None,
    img_shapes (per sample: target then controls), token_mask [B, N] | None.
    """
    import torch

    x0: torch.Tensor = inputs["target"]
    noise = torch.randn(x0.shape, generator=generator).to(x0.device, x0.dtype)
    sigma = torch.rand(x0.shape[0], generator=generator).to(x0.device, x0.dtype)
    s = sigma.view(-1, 1, 1)
    noisy = (1 - s) * x0 + s * noise
    pred: torch.Tensor = model(
        hidden_states=torch.cat([noisy, inputs["controls"]], dim=1),
        encoder_hidden_states=inputs["prompt_embeds"],
        encoder_hidden_states_mask=inputs["prompt_mask"],
        timestep=sigma,
        img_shapes=inputs["img_shapes"],
        return_dict=False,
    )[0][:, : x0.shape[1]]
    err = (pred.float() - (noise - x0).float()) ** 2
    token_mask: torch.Tensor | None = inputs.get("token_mask")
    if mask_weight and token_mask is not None:
        w = 1.0 + (mask_weight - 1.0) * token_mask
        return (err * w.unsqueeze(-1)).sum() / (w.sum() * err.shape[-1])
    return err.mean()
