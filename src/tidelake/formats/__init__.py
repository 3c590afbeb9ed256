"""Wire formats: each decodes messages into ChangeEvent."""
