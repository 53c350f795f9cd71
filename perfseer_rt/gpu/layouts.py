"""The memory layouts (``--layout``) and attention kernels (``--attention``)
a GPU prediction takes: the one source of truth, light enough for the
option parsers to import without the GPU predictor."""

#: ``nchw`` (PyTorch's default) or ``nhwc`` (channels-last).
LAYOUTS = ("nchw", "nhwc")
#: How the model's attention runs in PyTorch: ``fused`` (its code calls
#: ``scaled_dot_product_attention``, PyTorch >= 2.0: one flash / memory-efficient
#: kernel) or ``materialised`` (its code computes ``softmax(q k^T) v`` itself, as
#: Hugging Face's ``attn_implementation="eager"``, NVIDIA's DeepLearningExamples
#: BERT or any PyTorch before 2.0 do: the score matrix is written and read back).
#: The ONNX graph cannot tell them apart (both export as MatMul-Softmax-MatMul).
ATTENTION = ("fused", "materialised")
