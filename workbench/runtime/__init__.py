"""Running a model and judging its outputs: runners (onnxruntime in a child process, a TensorRT
engine, a split chain, segment by segment), the one output comparison, equivalence and the
verdict."""
