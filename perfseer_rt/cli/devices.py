"""``perfseer-rt devices add-gpu``, ``remove`` and ``gpu-specs``: your own GPUs
from their spec sheets (:mod:`perfseer_rt.gpu.spec_sheet`; the listing itself,
``perfseer-rt devices``, is in :mod:`perfseer_rt.cli.predict`)."""

from __future__ import annotations

from typing import Any

import click

from perfseer_rt.cli.common import emit_json
from perfseer_rt.errors import PerfSeerError
from perfseer_rt.gpu.entries import ALIASES as GPU_ALIASES
from perfseer_rt.gpu.spec_sheet import SpecSheet, check_mig, parse_assignment, read_sheet
from perfseer_rt.gpu.spec_store import (
    add_user_gpu,
    remove_user_gpu,
    shipped_gpu_specs,
    shipped_sheet,
    user_gpu_specs,
)
from perfseer_rt.predict.mig import MIG_PROFILES
from perfseer_rt.predict.registry import shipped_predictors, user_root


def _summary(s: SpecSheet) -> str:
    tc = s.fp16_tensor_fp32acc_tflops
    tensor = f", fp16/bf16 tensor {tc:g} TFLOPS (fp32 accumulate)" if tc is not None else ", no tensor cores"
    return (f"{s.name} ({s.architecture}, {s.form_factor}): {s.sms} SMs at {s.boost_clock_mhz:g} MHz, "
            f"{s.memory_gib:g} GiB at {s.memory_bandwidth_gbs:g} GB/s, fp32 {s.fp32_tflops:g} TFLOPS{tensor}, "
            f"{s.tdp_w:g} W")


@click.command("add-gpu")
@click.argument("name")
@click.option("--spec", "spec_file", type=click.Path(dir_okay=False), default=None,
              help="Spec sheet to add (JSON, format perfseer-rt-gpu-spec/1; docs/gpu-spec-sheets.md).")
@click.option("--from", "from_sheet", default=None, metavar="SHEET",
              help="Start from a shipped spec sheet (see `perfseer-rt devices gpu-specs`).")
@click.option("--set", "assignments", multiple=True, metavar="FIELD=VALUE",
              help="Replace one field, e.g. --set boost_clock_mhz=2100 (repeatable; the sheet is checked "
                   "again, so change the peaks that follow from it too).")
@click.option("--force", is_flag=True, help="Replace your GPU of that name.")
@click.option("--json", "as_json", is_flag=True, help="Print the stored entry as JSON.")
def add_gpu(name: str, spec_file: str | None, from_sheet: str | None, assignments: tuple[str, ...],
            force: bool, as_json: bool) -> None:
    """Add your GPU NAME from its spec sheet (stored as a user device entry)."""
    if (spec_file is None) == (from_sheet is None):
        raise PerfSeerError("add-gpu: give the spec sheet with --spec FILE.json or start from a shipped one "
                            "with --from SHEET (one of them; `perfseer-rt devices gpu-specs` lists them)")
    sheet = read_sheet(spec_file) if spec_file is not None else shipped_sheet(str(from_sheet))
    values = dict(parse_assignment(a) for a in assignments)
    if values:
        sheet = sheet.with_values(values, source="set by the user: perfseer-rt devices add-gpu --set " +
                                  " --set ".join(assignments))
    check_mig(sheet, MIG_PROFILES)
    path = add_user_gpu(user_root(), name, sheet, force=force,
                        reserved=set(shipped_predictors()) | set(GPU_ALIASES))
    if as_json:
        emit_json({"device": name, "path": str(path), "spec": sheet.to_dict()})
        return
    click.echo(f"added GPU {name!r}: {path}")
    click.echo(f"  {_summary(sheet)}")


@click.command("remove")
@click.argument("name")
def remove(name: str) -> None:
    """Remove your GPU NAME (added with add-gpu)."""
    folder = remove_user_gpu(user_root(), name)
    click.echo(f"removed GPU {name!r} ({folder})")


def _row(name: str, origin: str, s: SpecSheet) -> dict[str, Any]:
    return {"name": name, "origin": origin, "product": s.name, "architecture": s.architecture,
            "sms": s.sms, "boost_clock_mhz": s.boost_clock_mhz, "memory_gib": s.memory_gib,
            "memory_bandwidth_gbs": s.memory_bandwidth_gbs, "fp32_tflops": s.fp32_tflops,
            "fp16_tensor_fp32acc_tflops": s.fp16_tensor_fp32acc_tflops, "tdp_w": s.tdp_w}


@click.command("gpu-specs")
@click.argument("name", required=False)
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
def gpu_specs(name: str | None, as_json: bool) -> None:
    """List the GPU spec sheets (shipped and yours); with NAME, print that sheet
    (a start for your own: `perfseer-rt devices gpu-specs rtx-4090 > my-gpu.json`)."""
    shipped = {k: s for k, (_, s) in shipped_gpu_specs().items()}
    mine = {k: s for k, (_, s) in user_gpu_specs(user_root()).items()}
    if name is not None:
        sheet = mine.get(name) or shipped.get(name)
        if sheet is None:
            raise PerfSeerError(f"no GPU spec sheet {name!r}; known: {', '.join(sorted({**shipped, **mine}))}")
        click.echo(sheet.to_json(), nl=False)
        return
    rows = [_row(k, "shipped", s) for k, s in shipped.items()] + [_row(k, "user", s) for k, s in mine.items()]
    if as_json:
        emit_json(rows)
        return
    click.echo(f"{'sheet':<18} {'origin':<8} {'arch':<9} {'SMs':>4} {'MHz':>5} {'GiB':>5} {'GB/s':>5} "
               f"{'fp32 TF':>8} {'tensor TF':>9}  product")
    for r in rows:
        tc = r["fp16_tensor_fp32acc_tflops"]
        click.echo(f"{r['name']:<18} {r['origin']:<8} {r['architecture']:<9} {r['sms']:>4} "
                   f"{r['boost_clock_mhz']:>5.0f} {r['memory_gib']:>5g} {r['memory_bandwidth_gbs']:>5.0f} "
                   f"{r['fp32_tflops']:>8g} {'-' if tc is None else f'{tc:g}':>9}  {r['product']}")
    click.echo("tensor TF: dense fp16/bf16 tensor-core peak with fp32 accumulate (what PyTorch autocast runs); "
               "sources per figure: `perfseer-rt devices gpu-specs NAME`")


SUBCOMMANDS = (add_gpu, remove, gpu_specs)
