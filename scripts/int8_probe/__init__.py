"""Issue 56: a custom OpenVINO operation (int8 Q4_1 x Q8_1 matmul, AVX2) and its probe through OpenVINO GenAI."""
