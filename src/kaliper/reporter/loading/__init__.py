"""Loading: an experiment's stored documents → the reporter's model (runs, trials, their statistics).

What loading hands back for a chunk of trials (`tables.LoadedChunk`) also holds the chunk's rows of
results.csv and results.parquet, made where the chunk is loaded: at 100,000 runs, by the worker
processes (`workers`), in parallel. The lowest room of the reporter: it imports no other.
"""
