"""The engine's native kernels: C++ OpenVINO extensions built from this folder at ``make`` time.

``int8/``: ``genmesh::Q41MatMul`` (``Q41X8MatMul``), ``Q4KMatMul`` (``Q4KX8MatMul``), ``Q6KMatMul`` (``Q6KX8MatMul``)
and ``Q80MatMul``, the file's Q4_1 / Q4_K / Q6_K / Q8_0 blocks times int8 (Q8_1 / Q8_K / Q8_0) activations with AVX2
``maddubs`` (docs/int8-avx2.md). ``build`` compiles it (cmake, g++) into the GGUF cache, keyed by its sources;
``q41_op`` writes the ops into a model from Python; ``selection`` decides by the CPU whether the engine uses it
(docs/engine.md, "Integer matmuls on AVX2 CPUs").
"""
