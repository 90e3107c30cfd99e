"""Audio models served beside the chat model (issue 43): Whisper (``/v1/audio/transcriptions``) through
OpenVINO GenAI's WhisperPipeline and a Piper voice (``/v1/audio/speech``) on the OpenVINO runtime."""
