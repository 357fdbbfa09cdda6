"""cnn-train / cnn-infer: ResNet training and inference, with their models and input pipelines."""
