"""What is concluded: slopes against width (and depth), the verdict's rules and the engine that applies them, the
causes, the parameter audit, narrow-width effects and the depth verdict. Reads frames and facts; never imports
torch. Imports only :mod:`coordcheck.record.shapes`, :mod:`coordcheck.run.sweep`'s types and :mod:`coordcheck.core`."""
