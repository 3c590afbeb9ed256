"""Running the stages together: child-process supervision, the demo."""
