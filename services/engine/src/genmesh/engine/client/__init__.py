"""The API process's side of the engine core: start, supervise and talk to one core process.

The core client (``core_client``), its supervisor and watchdog, the output processor with its
detokenizer and stop strings, one generation (``generation``), ``n`` choices (``n_choices``) and
the scoring client (``scoring_client``). It imports the core's messages, never the HTTP surface.
"""
