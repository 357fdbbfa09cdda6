"""`python -m kaliper` is what the local executor runs for a container whose command is `kaliper`."""

from kaliper.cli import main

main()
