"""`Configurable`: the `from_config` and `repr` of an object its config defines."""


class Configurable:
    """Mixin of an object whose `get_config()` holds its constructor's
    arguments (a sampler, a process): built again from it, shown by it."""

    def get_config(self):
        raise NotImplementedError

    @classmethod
    def from_config(cls, config):
        return cls(**config)

    def __repr__(self):
        args = ", ".join(f"{k}={v!r}" for k, v in self.get_config().items())
        return f"{type(self).__name__}({args})"


def deserialized(config, *names):
    """A copy of a Keras `config` with each of `names` that holds a
    serialized Keras object (a dict) deserialized: the `from_config` of a
    layer or metric that holds other Keras objects."""
    import keras

    config = dict(config)
    for name in names:
        if isinstance(config.get(name), dict):
            config[name] = keras.saving.deserialize_keras_object(config[name])
    return config
