"""The local executor: a rendered job manifest run as processes on this machine, with the training
operator's environment, success, failure and deadline rules (`executor`, `completion`, `operator_env`),
and each run's logs, launch.json, stand-in records and resource sampling stored (`runner`)."""
