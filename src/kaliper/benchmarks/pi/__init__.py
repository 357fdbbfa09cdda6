"""pi-*: the microbenchmarks (matmul, conv2d, framework import), one module per framework."""
