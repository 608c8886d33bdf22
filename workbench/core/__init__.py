"""The nouns every layer shares: errors and findings, atomic writes, the model handle and its one
graph index, inputs, weights by reference, the workspace, TensorRT log rules, next steps as
commands."""
