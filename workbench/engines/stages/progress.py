"""The build's progress events as a person reads them: one `emit` for every stage, the
notice that a twin build is being waited for, and the relay that words the worker's phases
in the model's and the engine's names."""
from __future__ import annotations

from typing import Any, Callable, Dict, Optional

OnEvent = Optional[Callable[[Dict[str, Any]], None]]


def emit(on_event: OnEvent, phase: str, fraction: Optional[float] = None,
         message: str = "") -> None:
    """Send one progress event (nothing without a listener)."""
    if on_event is not None:
        on_event({"event": "progress", "phase": phase, "fraction": fraction,
                  "message": message})


def waiting_for_twin(on_event: OnEvent) -> None:
    """Tell the user why nothing moves: the same engine is being built elsewhere."""
    if on_event is not None:
        on_event({"event": "notice", "message": "another build of this engine (same model and "
                  "settings) is running; waiting for it, then using its engine"})
    emit(on_event, "waiting", None, "another build of the same engine is running")


def readable_progress(on_event: OnEvent, model: str, engine: str, names: Dict[str, str]
                      ) -> OnEvent:
    """Progress events as a person reads them: the model's and the engine's file names, never
    the workspace's hash-named files, and a message for every phase. `names["parsed"]`, set
    once the route is known, says which ONNX TensorRT parses (e.g. the model's fp16 version)."""
    if on_event is None:
        return None
    fixed = {"hashing": f"reading {model}", "writing": engine, "done": f"{engine} ready",
             "cache-hit": f"{engine} from the cache (built before with the same model and "
             "settings)"}

    def relay(ev: Dict[str, Any]) -> None:
        if ev.get("event") == "progress":
            phase, msg = ev.get("phase"), str(ev.get("message") or "")
            parsed = names.get("parsed", model)
            if phase in fixed:
                msg = fixed[str(phase)]
            elif phase == "parsing":
                msg = parsed
            elif phase == "building" and not msg:
                msg = f"TensorRT builder started on {parsed}"
            elif phase == "precision":
                msg = f"{msg} ({model})" if msg else model
            ev = dict(ev, message=msg)
        on_event(ev)

    return relay
