"""Container checks: when the doctor runs inside a container, the GPU device nodes it was given and whether this
process may use them (the render group). Windows items do not apply there."""

from __future__ import annotations

from aipc_env.doctor.checks.base import CheckContext, Verdict, check, fail, ok, skip, warn

RUN_FIX = (
    "start the container with the GPU passed in: aipc-env container run (it adds --device /dev/dri and "
    "--group-add with the host's numeric group of each render node)"
)


def check_container(ctx: CheckContext) -> Verdict:
    info = ctx.facts.container
    if info is None:
        return skip("not in a container")
    return ok(f"inside a {info.engine} container; groups {', '.join(info.groups) or 'none'}")


check("container", "Container", "Running in a container")(check_container)


def check_dri_access(ctx: CheckContext) -> Verdict:
    info = ctx.facts.container
    if info is None:
        return skip("not in a container")
    render = [n for n in info.nodes if "render" in n.path.rsplit("/", 1)[-1]]
    if not render:
        if not ctx.facts.has_intel_gpu:  # nothing says the host has one: the CPU path is a valid way to run here
            return warn(
                "no /dev/dri/renderD* node and no Intel GPU seen",
                "this container runs everything on the CPU (the built-in default works; Qwen-Image-Edit training needs the GPU)",
                f"only if the host has an Intel GPU: {RUN_FIX}",
            )
        return fail(
            "no /dev/dri/renderD* node in the container",
            "without the render node torch+xpu sees no GPU and everything runs on the CPU",
            RUN_FIX,
        )
    blocked = [n for n in render if not n.readable_writable]
    if blocked:
        groups = sorted({f"{n.group or '?'} (gid {n.gid})" if n.gid is not None else (n.group or "?") for n in blocked})
        gids = sorted({n.gid for n in blocked if n.gid is not None})
        add = " ".join(f"--group-add {g}" for g in gids) or "--group-add <the node's numeric gid>"
        return fail(
            f"{', '.join(n.path for n in blocked)} not usable (group {', '.join(groups)}; this process is in "
            f"{', '.join(info.groups) or 'no group'})",
            "the render node is opened read-write by the GPU "
            "runtime; a group name such as 'render' resolves inside the image, to another number than the "
            "host's",
            f"start the container with {add} (the host's numeric gid; aipc-env container run adds "
            "it), or run as a user in that group",
        )
    return ok(", ".join(n.path for n in render))


check("dri-access", "Container", "GPU device nodes (/dev/dri)")(check_dri_access)
