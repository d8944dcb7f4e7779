"""Installs talk_hf.  `pip install .` or `pip install -e ".[test]"`."""

from pathlib import Path

from setuptools import find_namespace_packages, setup

ROOT = Path(__file__).parent
version_namespace: dict = {}
# Serving (`talk_hf.export`, int8, benchmarks/bench_serving.py): the runtime a model is exported to,
# the int8 library, and the engine users deploy the baseline with.  onnxscript 0.6: the first with the
# exporter API of torch 2.11; ONNX Runtime 1.32: before it, the int8 quantizer turns a Gemm into a MatMul
# by transposing its weight in place, although a tied embedding's Gather reads the same initializer
# (SliceNet's step: shape inference then fails); torchao 0.18: the first whose Int8WeightOnlyConfig
# makes Int8Tensor weights.
SERVING = ["onnx>=1.17", "onnxscript>=0.6", "onnxruntime>=1.32", "torchao>=0.18", "ctranslate2>=4.5"]
PLOTS = "matplotlib>=3.9"  # runs on NumPy 2 (3.7 does not)
exec((ROOT / "talk_hf" / "version.py").read_text(), version_namespace)

setup(
    name="talk_hf",
    version=version_namespace["__version__"],
    description=(
        "TaLK convolutions and DynamicConv/LightConv as HuggingFace Transformers models, "
        "with just-in-time compiled CUDA kernels and fixed-size generation state"
    ),
    long_description=(ROOT / "README.md").read_text(encoding="utf-8"),
    long_description_content_type="text/markdown",
    license="MIT",
    python_requires=">=3.10",
    # The kernel sources live in the top-level csrc/ and travel inside the package as talk_hf/csrc
    # (package data, compiled on first use, not at install); an editable install or the source
    # tree reads them from csrc/ itself (talk_hf.ops._build.build_folder.CSRC).
    packages=find_namespace_packages(include=["talk_hf", "talk_hf.*"], exclude=["*.__pycache__"]) + ["talk_hf.csrc"],
    package_dir={"talk_hf.csrc": "csrc"},
    package_data={"talk_hf.csrc": ["**/*.cu", "**/*.cuh", "**/*.cpp", "**/*.h"]},  # csrc/ and its per-op folders
    install_requires=[
        "torch>=2.11",  # the oldest the whole test suite passed on (2.8 failed three tests, 2.6 does not import)
        "transformers>=5.17,<6",  # 5.17 is the oldest release the tests run against (.ci/run)
        "accelerate>=1.15",  # 1.13: the scripts' two-process runs fail; 1.14: FSDP2 unties tied embeddings
        "datasets>=3.0",
        "safetensors>=0.8",  # this and the next two: transformers 5.17's own floors
        "huggingface-hub>=1.5",
        "tokenizers>=0.23.1",
        "filelock>=3.12",
        "ninja",  # torch.utils.cpp_extension builds the kernels with it on first use
    ],
    extras_require={
        # sacremoses: the Moses tokenizer of converted fairseq checkpoints (transformers' FSMTTokenizer)
        "test": [
            "pytest>=8",
            "pytest-xdist>=3.5",  # the README's test command spreads the files over one worker per core
            "psutil",  # tests/processes.py ends every process a timed-out test started (accelerate needs it too)
            "hypothesis>=6.100",
            "sacrebleu>=2.4",
            "rouge_score>=0.1.2",
            PLOTS,
            "sacremoses>=0.1",
            *SERVING,
        ],
        "convert": ["sacremoses>=0.1"],
        "examples": [
            "sacrebleu>=2.4",
            "rouge_score>=0.1.2",
            PLOTS,
            "tensorboard>=2.18",  # TensorBoard 2.17 fails on NumPy 2
        ],
        "serving": SERVING,
    },
    classifiers=[
        "Programming Language :: Python :: 3",
        "Topic :: Scientific/Engineering :: Artificial Intelligence",
    ],
)
