"""The setup, what is trained: the model at a width (built-in builders, Hugging Face configs), its data, its
parametrization,
initialisation and optimizer, depth scaling, and the device it runs on. Imports only :mod:`coordcheck.core`."""
