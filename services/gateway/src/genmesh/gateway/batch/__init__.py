"""The Files and Batch API: files in Redis (``files.py``), a batch's input checked as it streams
(``validation.py``), batches and their lines in Redis (``batches.py``), the runner in every
replica that claims lines with leases (``runner.py``) and sends each through the interactive
path (``line.py``). docs/batch.md is the manual."""
