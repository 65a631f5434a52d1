"""`make chaos`: the fault matrix (bench/chaos/driver.py)."""
