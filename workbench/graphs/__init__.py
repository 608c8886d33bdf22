"""What is in a model and how it is drawn: summary and lint (inspect), the graph view's layered
layout (in C too: _layout.c), the engine's layers as a graph."""
