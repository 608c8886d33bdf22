"""The engine build as stages, each a module with one job (`workbench.engines.engine` runs
them in order):

    resolve    model + config -> BuildJob: the model handle, default profiles, the worker's
               TensorRT and route, the cache key (refuses bad input before any work)
    lookup     the key's single-flight lock; the cached engine when there is one
    prepare    the ONNX TensorRT parses: precision transform, I/O casts (PreparedOnnx)
    request    BuildJob + PreparedOnnx -> BuildRequest, the worker op's typed request
    call       send it; time limit, cancel, the profile check and name index beside it
    translate  the worker's result -> findings; its errors -> the user's exception
    publish    the engine into the cache with its card, the output copy, the history

(`profiles` and `progress` serve several stages: default profiles and their checks; the
progress events as a person reads them.)"""
