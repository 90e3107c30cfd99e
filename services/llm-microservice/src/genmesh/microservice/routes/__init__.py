"""HTTP routes of the microservice, one module per endpoint family."""
