"""The TensorRT worker process and its client.

TensorRT work (parse, build, run, profile) runs in a separate process so that a TensorRT crash
or a 30-minute build never takes the notebook kernel down, builds can be cancelled and
time-limited, and TensorRT can live in another interpreter (``WORKBENCH_TRT_PYTHON``, e.g. the
GPU rig's Python 3.9). Everything under this package imports only the stdlib, numpy, the
TensorRT module and Polygraphy, and keeps Python 3.9 syntax.

    protocol      both ends: op names, message shapes, backend names, error codes, framing
    build_request both ends: the `build` op's typed request (BuildRequest)
    client side   client (WorkerClient), launch (exec'd start, -S), forked (fork start, CLI)
    childproc     watching any child (time, memory, Cancel, group kill, crash names):
                  shared by the client, the onnxruntime child and the CLI's forked runs
    server side   boot (entry, backend preload) -> main (loop, ping/backend_info/sleep/crash)
                  registry (op registry, OpError, Context)
                  loaders/ (one module per seam: backend, logger, network (plugins, network
                  from ONNX, parser-error records), describe, profiles, config (builder config,
                  timing cache), layer_precisions, calibration, engine (build, runtime), files),
                  cuda (the CUDA wrapper)
                  ops_build (build, inspect_engine), ops_parse (parse, check_build),
                  ops_precision (network_dtypes), ops_profile (profile_engine, cuda_info)

Protocol (JSON lines, see protocol.py): request ``{"id", "op", "args"}`` on stdin; the worker
answers with ``{"id", "event": "progress"|"log"}`` events and exactly one
``{"id", "event": "result"}`` or ``{"id", "event": "error"}``. ``{"op": "cancel", "id": X}``
asks request X to stop.
"""
