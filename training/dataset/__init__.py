"""Dataset building: zoo configs -> ONNX -> PerfGraph + measured labels."""
