"""What the gateway keeps for a key: files, batches and their output, stored responses, and their purge."""
