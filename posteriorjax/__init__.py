"""posteriorjax: is a generative inverse solver really sampling the posterior it claims to?"""

__version__ = "0.1.0"
