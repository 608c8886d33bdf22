"""`workbench gpus`: the GPUs and MIG instances the worker can be pinned to (`--gpu ID|UUID`
on build and timing-capture). Reads NVML or `nvidia-smi -L`; changes no GPU setting."""
from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:  # pragma: no cover
    import argparse

NAME = "gpus"
HELP = "list GPUs and MIG instances (ids and UUIDs for --gpu)"


def add_arguments(p: "argparse.ArgumentParser") -> None:
    p.add_argument("--json", action="store_true", help="print the list as JSON")


def run(args: "argparse.Namespace") -> int:
    from workbench.fleet.gpus import list_gpus

    gpus = list_gpus()
    if args.json:
        from workbench.cli.common import print_json

        print_json({"gpus": [g.to_dict() for g in gpus]})
        return 0
    if not gpus:
        from workbench.worker.nogpu import NO_GPU

        print(f"{NO_GPU} (neither NVML nor `nvidia-smi -L` lists one); builds for "
              "TensorRT-RTX targets still run here ahead of time (--target sm89)")
        return 0
    for g in gpus:
        cc = f"  sm{g.compute_capability.replace('.', '')}" if g.compute_capability else ""
        print(f"{g.id:<5} {g.uuid}  {g.name}{cc}")
        for m in g.migs:
            print(f"  {m.id:<5} {m.uuid}  {m.name}")
    return 0
