"""The ground every stage stands on: user-facing errors and exit statuses (:mod:`~coordcheck.core.errors`), the tidy
frame's schema and safe files (:mod:`~coordcheck.core.frame`), text for people and JSON (:mod:`~coordcheck.core.text`),
dotted paths to objects (:mod:`~coordcheck.core.targets`) and the old import paths (:mod:`~coordcheck.core.moved`).
Nothing here imports torch, or any other stage."""
