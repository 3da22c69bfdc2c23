"""A device call's files into the repository: one visit's directory of decoder runs and its notes.

``benchmarks/h200_sweep_visit.sh`` leaves in ``$OUT`` the run archives (``sweepA.tgz``,
``sweepB.tgz``: one folder of cases each, as ``fidelity.py run --archive`` writes them),
the decoder's capacity (``capacity.json``, its probes' records in ``capacity_runs.tgz``),
their logs. :func:`import_visit` copies them under
``profiles/h200/validation/real/<visit>/`` as they are (archives stay archives: the sweeps'
step records would otherwise take tens of MB of the repository; the comparison unpacks them,
:func:`~.sweep_report.unpack`) with the SPS table the DSpark cases scheduled from and a
``notes.json`` like the earlier visits': the GPU's uuid, whether the shipped profile was timed
on it, the command, which sweeps came back whole. Each call writes its own ``gpu_PART.txt`` and
``visit_PART.log``, so the calls' files share one folder.
"""
from __future__ import annotations

import json
import re
import shutil
import tarfile
from pathlib import Path

PART_FILES = {"sweepA": ("sweepA.tgz", "sweepA.log"), "sweepB": ("sweepB.tgz", "sweepB.log"),
              "sweepL": ("sweepL.tgz", "sweepL.log"),
              "capacity": ("capacity.json", "capacity_runs.tgz", "capacity.log")}
DECODER = ("decoder with overlapped steps (step n+1 launched before step n's tokens are read), device-side "
           "verify metadata, DSpark budget from lagged confidences on the host, prompt steps through CUDA "
           "graphs up to 512 tokens, mixed batching, prefix cache on; step rows on the GPU's clock; warm-up "
           "captured every graph; KV sized to free memory; one pass per case; no crosscheck")


def import_visit(src: Path, dest: Path, parts: list[str], command: str, profile_uuids: set[str]) -> dict:
    """Copy the files of the device calls ``parts`` (sweepA, sweepB, capacity) from ``src`` into
    the visit directory ``dest`` and write its ``notes.json`` (``command``: the calls as run;
    ``profile_uuids``: the GPUs the shipped profile was timed on). Parts served on different GPUs
    are different visits (an InputError). Returns the notes."""
    from dspark_sim.errors import InputError

    uuids = {part: _gpu_uuid(src / f"gpu_{part}.txt") for part in parts}
    if len(set(uuids.values())) > 1:
        raise InputError(src, "--parts", " ".join(parts), f"served on different GPUs ({uuids}): import them as "
                         "separate visits")
    dest.mkdir(parents=True, exist_ok=True)
    found = [name for part in parts for name in PART_FILES[part] + (f"visit_{part}.log", f"gpu_{part}.txt")
             if (src / name).is_file()]
    for name in found:
        shutil.copy(src / name, dest / name)
    uuid = next(iter(uuids.values()), None)
    whole = []
    for log in (src / f"{part}.log" for part in parts if part.startswith("sweep")):
        match = re.search(r"whole units: (.*)", log.read_text()) if log.is_file() else None
        if match:
            whole += [u.strip() for u in match.group(1).split(",") if u.strip()]
    for archive in sorted(dest.glob("sweep*.tgz")):
        _extract_member(archive, "sps_dspark.json", dest)
    notes = {"current_decoder": True, "decoder": DECODER, "gpu_uuid": uuid, "command": command,
             "end": ("load sweeps served whole: " + ", ".join(whole) if whole else "no sweep came back whole")
             + ("; the decoder's capacity searched (capacity.json)" if "capacity.json" in found else ""),
             "profile_host": ("unseen host: no part of the profile was timed on it" if uuid and uuid not in profile_uuids
                              else "the profile's host" if uuid else "host not recorded"),
             "rows": "gpu", "files": found}
    (dest / "notes.json").write_text(json.dumps(notes, indent=1) + "\n")
    return notes


def _gpu_uuid(path: Path) -> str | None:
    """The GPU's uuid in ``path`` (nvidia-smi's csv), or None."""
    match = re.search(r"GPU-[0-9a-f-]+", path.read_text()) if path.is_file() else None
    return match.group(0) if match else None


def _extract_member(archive: Path, name: str, dest: Path) -> None:
    """``name`` from the archive's top folder into ``dest`` (when it has one and dest has none)."""
    if (dest / name).exists():
        return
    with tarfile.open(archive) as tar:
        member = next((m for m in tar.getmembers() if Path(m.name).name == name and m.isfile()), None)
        if member is not None:
            with tar.extractfile(member) as f:
                (dest / name).write_bytes(f.read())
