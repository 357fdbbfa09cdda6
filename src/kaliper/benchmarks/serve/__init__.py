"""The `serve` family: MLPerf LoadGen scenarios against built-in models and inference servers."""
