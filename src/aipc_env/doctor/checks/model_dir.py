"""Model checks: the local Qwen-Image-Edit directory."""

from __future__ import annotations

from aipc_env.core.invocation import download_model
from aipc_env.core.specs import parse_version
from aipc_env.doctor.checks.base import CheckContext, Verdict, check, fail, ok, skip

VARIANTS = {
    "edit": "Qwen-Image-Edit (original)",
    "edit-2509": "Qwen-Image-Edit-2509",
    "edit-2511": "Qwen-Image-Edit-2511",
    "edit-plus": "Qwen-Image-Edit Plus (2509/2511)",
}


def check_model_dir(ctx: CheckContext) -> Verdict:
    model = ctx.facts.model
    if model is None:
        return skip("no model dir given (--model-dir PATH)")
    download = download_model(str(model.path))
    if not model.exists:
        return fail(f"{model.path} does not exist", "training loads the model from a local directory", f"download it: {download}")
    if model.missing:
        return fail(
            f"missing {', '.join(model.missing)} in {model.path}",
            "a diffusers Qwen-Image-Edit "
            "repo has model_index.json, transformer/, text_encoder/, vae/, scheduler/, tokenizer/, "
            "processor/",
            f"complete the download (re-run it; it resumes): {download}",
        )
    if model.variant in (None, "unknown"):
        return fail(
            f"pipeline class {model.pipeline_class!r}",
            "only QwenImageEditPipeline and QwenImageEditPlusPipeline repos are supported",
            f"download a Qwen-Image-Edit repo: {download}",
        )
    size = f", {model.size_bytes / 1e9:.0f} GB" if model.size_bytes else ""
    seen = f"{VARIANTS[model.variant]} ({model.pipeline_class}{size})"
    needed = ctx.matrix.training_stack.diffusers.get(model.variant)
    have = ctx.installed.get("diffusers")
    if needed and have and _older(have, needed):
        return fail(
            f"{seen}; the training env has diffusers {have}",
            f"{VARIANTS[model.variant]} needs diffusers >= {needed} (environments/matrix.yaml, training_stack)",
            f'pip install "diffusers>={needed}" in the training env, or rebuild it: {ctx.env_fix()}',
        )
    return ok(seen)


def _older(have: str, needed: str) -> bool:
    from packaging.version import InvalidVersion

    try:
        return parse_version(have) < parse_version(needed)
    except InvalidVersion:
        return False


check("model-dir", "Model", "Qwen-Image-Edit model directory")(check_model_dir)
