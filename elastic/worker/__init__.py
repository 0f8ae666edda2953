"""What runs on each worker host around the training process: the lease wrapper
(``python -m elastic.worker.lease -- COMMAND``), which ends the training when the launcher that
started it is gone. Standard library and ``shared`` only: it starts before the training's
imports, on every host."""
