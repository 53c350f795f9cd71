"""``records``: every published source -> its campaign-format folders under ``data/public-gpu``."""

from __future__ import annotations

from pathlib import Path

from tqdm import tqdm

from training.publicgpu import lambda_logs, neusight, timm_csv
from training.publicgpu.dataset import group_by_folder, write_folders


def build_timm(folder: Path, out: Path) -> dict[str, int]:
    """The shared timm CSVs -> ``out/<gpu>/<mode>-amp-fp16-<layout>-pt<ver>`` folders."""
    files = timm_csv.shared_files(folder)
    if not files:  # never replace the committed records by nothing
        raise timm_csv.BenchmarkFileError(f"no timm benchmark CSVs in {folder}")
    by_folder: dict[str, list[dict]] = {}
    settings: dict = {"source": timm_csv.SOURCE, "repository": timm_csv.REPOSITORY,
                      "licence": timm_csv.LICENCE, "files": {}}
    for path in tqdm(files, desc="timm CSVs", unit="file"):
        f = timm_csv.parse_name(path.name)
        by_folder.setdefault(f.folder, []).extend(timm_csv.read_file(path))
        settings["files"][path.name] = f.folder
    return write_folders(out, by_folder, settings)


def build_neusight(folder: Path, out: Path) -> dict[str, int]:
    """NeuSight's labels.csv -> ``out/<device>/<mode>-fp32`` folders."""
    settings = {"source": neusight.SOURCE, "repository": neusight.REPOSITORY,
                "licence": neusight.LICENCE, "labels": str(folder / "labels.csv")}
    return write_folders(out, group_by_folder(neusight.records(folder), neusight.folder_of), settings)


def build_lambda(repo: Path, out: Path) -> tuple[dict[str, int], dict[str, int]]:
    """Lambda's single-GPU training logs (a clone's git directory) ->
    ``out/<device>/train-<precision>-<model>`` folders; also what was left out and why."""
    recs, skipped = lambda_logs.records(repo)
    if not recs:  # never replace the committed records by nothing
        raise lambda_logs.LambdaLogError(f"no usable Lambda logs in {repo}")
    settings = {"source": lambda_logs.SOURCE, "repository": lambda_logs.REPOSITORY,
                "licence": lambda_logs.LICENCE, "commit": recs[0]["provenance"]["commits"][0],
                "left_out": skipped}
    return write_folders(out, group_by_folder(recs, lambda_logs.folder_of), settings), skipped


def build_all(timm_dir: Path, neusight_dir: Path, out: Path) -> dict[str, int]:
    """Both sources; folder (relative to ``out``) -> record count."""
    counts = {f"timm/{k}": v for k, v in build_timm(timm_dir, out / "timm").items()}
    counts |= {f"neusight-e2e/{k}": v for k, v in build_neusight(neusight_dir, out / "neusight-e2e").items()}
    return counts
