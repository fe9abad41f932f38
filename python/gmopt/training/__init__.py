"""Training APIs: :mod:`gmopt.training.api` mirrors ONNX Runtime's
``onnxruntime.training.api``."""
