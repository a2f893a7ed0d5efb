"""What is concluded: slopes against width (and depth), each module's role from measured facts, the verdict's rule
table and the engine that applies it, the causes, the parameter audit, narrow-width effects and the depth verdict.
Reads frames and facts; never imports torch. Imports only :mod:`coordcheck.record.shapes` (torch-free) and
:mod:`coordcheck.core`."""
