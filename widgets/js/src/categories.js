// Op categories and their colours (Netron-like groups), for the default colouring and legend.
export const CATEGORY_COLORS = {
  "conv / matmul": "#3b6ea8",
  "activation": "#b5443a",
  "normalization": "#2f7d5b",
  "pooling": "#4f9a3a",
  "elementwise": "#6b7b8c",
  "reduce": "#7a5fa0",
  "shape / layout": "#a0704a",
  "data / constant": "#b9b9b9",
  "attention": "#c2566f",
  "control flow": "#444444",
  "quantize": "#cf8e1d",
  "other": "#8c8c6a",
};

const OPS = {
  "conv / matmul": ["Conv", "ConvTranspose", "MatMul", "Gemm", "MatMulInteger", "ConvInteger", "QLinearConv", "QLinearMatMul", "Einsum"],
  "activation": ["Relu", "LeakyRelu", "PRelu", "Sigmoid", "Tanh", "Softmax", "LogSoftmax", "Gelu", "Elu", "Selu", "HardSigmoid", "HardSwish", "Softplus", "Softsign", "Clip", "Erf", "Mish", "ThresholdedRelu", "Celu"],
  "normalization": ["BatchNormalization", "LayerNormalization", "InstanceNormalization", "GroupNormalization", "LpNormalization", "LRN", "SkipLayerNormalization", "RMSNormalization"],
  "pooling": ["MaxPool", "AveragePool", "GlobalAveragePool", "GlobalMaxPool", "LpPool", "GlobalLpPool", "MaxRoiPool", "RoiAlign"],
  "elementwise": ["Add", "Sub", "Mul", "Div", "Pow", "Sqrt", "Exp", "Log", "Abs", "Neg", "Reciprocal", "Floor", "Ceil", "Round", "Min", "Max", "Sum", "Mean", "Equal", "Less", "Greater", "LessOrEqual", "GreaterOrEqual", "And", "Or", "Not", "Xor", "Where", "Mod", "Sin", "Cos", "Sign", "IsNaN", "IsInf", "BitShift"],
  "reduce": ["ReduceMean", "ReduceSum", "ReduceMax", "ReduceMin", "ReduceProd", "ReduceL1", "ReduceL2", "ReduceLogSum", "ReduceLogSumExp", "ReduceSumSquare", "ArgMax", "ArgMin", "TopK", "CumSum"],
  "shape / layout": ["Reshape", "Transpose", "Flatten", "Squeeze", "Unsqueeze", "Concat", "Split", "Slice", "Gather", "GatherElements", "GatherND", "Scatter", "ScatterND", "ScatterElements", "Expand", "Tile", "Pad", "Shape", "Size", "Resize", "Upsample", "DepthToSpace", "SpaceToDepth", "Cast", "CastLike", "NonZero", "OneHot", "Range", "Trilu", "Compress"],
  "data / constant": ["Constant", "ConstantOfShape", "Identity", "Dropout", "EyeLike", "RandomNormal", "RandomUniform", "RandomNormalLike", "RandomUniformLike"],
  "attention": ["Attention", "MultiHeadAttention", "GroupQueryAttention", "RotaryEmbedding"],
  "control flow": ["If", "Loop", "Scan"],
  "quantize": ["QuantizeLinear", "DequantizeLinear", "DynamicQuantizeLinear"],
};

const BY_OP = new Map();
for (const [cat, ops] of Object.entries(OPS)) for (const op of ops) BY_OP.set(op, cat);

export function categoryOf(op) {
  return BY_OP.get(op) || "other";
}
