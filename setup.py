from setuptools import find_packages, setup

# Ranges: a runtime or [flax] lower bound is that package's version in the lower-bound set CI's
# smoke subset runs against (constraints-lower.txt); a test-only lower bound is the tested
# version. Upper bounds: the next minor (the next major for the slower-moving packages) that no
# test has run. constraints.txt pins the whole tested set (tests/test_packaging.py checks all three agree).
setup(
    name="posteriorjax",
    version="0.1.0",
    description="Is a generative inverse solver sampling its posterior? Physics inverse problems in JAX.",
    license="Apache-2.0",
    license_files=["LICENSE"],
    classifiers=["Programming Language :: Python :: 3.11"],
    packages=find_packages(include=["posteriorjax", "posteriorjax.*", "experiments", "configs", "configs.*"]),
    python_requires=">=3.11",  # jax >= 0.7's floor; the interpreter CI and the tests run on
    install_requires=[
        "jax>=0.8.0,<0.11",  # 0.8.0: first with jax.enable_x64 (0.6.1: jax.shard_map(check_vma=))
        "jaxlib>=0.8.0,<0.11",
        "equinox>=0.13.0,<0.14",
        "optax>=0.2.5,<0.3",
        "diffrax>=0.7.0,<0.8",
        "lineax>=0.0.8,<0.2",
        "orbax-checkpoint>=0.11.17,<0.13",
        "numpy>=2.0.2,<3",
        "scipy>=1.13.1,<2",
        "absl-py>=2.1.0,<3",
        "ml-collections>=1.0.0,<2",
        "matplotlib>=3.8.4,<4",
        "tqdm>=4.66.0,<5",
    ],
    extras_require={
        # posteriorjax.nn.flax_adapter (from_linen, from_nnx)
        "flax": ["flax>=0.10.6,<0.13"],
        # posteriorjax.exchange: .h5 export and sample files
        "exchange": ["h5py>=3.16.0,<4"],
        # posteriorjax.exchange.posteriorbench: PosteriorBench's DatasetDict rows (pulls pyarrow)
        "posteriorbench": ["datasets>=5.2.0,<6"],
        # the documentation site: mkdocs build --strict (mkdocs.yml, docs/)
        "docs": [
            "mkdocs>=1.6.1,<1.7",
            "mkdocs-material>=9.8.2,<9.9",
            "mkdocstrings>=1.0.8,<1.1",
            "mkdocstrings-python>=2.0.11,<2.1",
        ],
        "test": [
            "pytest>=9.2,<10",
            "pytest-xdist>=3.8,<4",
            "POT>=0.9.7,<0.10",
            "properscoring>=0.1,<0.2",
            "scoringrules>=0.10,<0.11",
            "tarp>=0.1.1,<0.2",
            "deprecation>=2.1,<3",  # imported by tarp without being declared
            "arviz>=0.23.4,<0.24",  # R-hat / ESS cross-check
            "packaging>=26.4,<27",  # tests/test_packaging.py
            "h5py>=3.16.0,<4",  # tests/test_exchange.py (.h5 files)
        ],
    },
)
