"""Public whole-model GPU measurements (measured by others) as a dataset, and their models rebuilt as ONNX."""
