from setuptools import find_packages, setup

setup(
    name="posteriorjax",
    version="0.1.0",
    description="Is a generative inverse solver sampling its posterior? Physics inverse problems in JAX.",
    packages=find_packages(include=["posteriorjax", "posteriorjax.*", "experiments", "configs", "configs.*"]),
    python_requires=">=3.10",
    install_requires=[
        "jax>=0.4.35",
        "jaxlib>=0.4.35",
        "flax",
        "optax",
        "equinox",
        "diffrax",
        "lineax",
        "orbax-checkpoint",
        "chex",
        "numpy",
        "absl-py",
        "ml-collections",
        "matplotlib",
        "tqdm",
    ],
    extras_require={
        "test": [
            "pytest",
            "pytest-xdist",
            "scipy",
            "POT",
            "properscoring",
            "scoringrules",
            "tarp",
            "deprecation",  # imported by tarp without being declared
        ],
    },
)
