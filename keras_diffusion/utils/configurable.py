"""`Configurable`: the config, `from_config` and `repr` of an object its
constructor's arguments define."""

import inspect


def constructor_arguments(cls):
    """The names of the arguments of `cls`'s constructor, in order: those of
    the base that its `**kwargs` reach first (`ConsistencySchedule` passes
    flow matching's on), then its own."""
    names = []
    for klass in cls.__mro__:
        if "__init__" not in vars(klass) or klass is object:
            continue
        params = list(inspect.signature(klass.__init__).parameters.values())[1:]
        named = [
            p.name for p in params if p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)
        ]
        names = named + [name for name in names if name not in named]
        if all(p.kind is not p.VAR_KEYWORD for p in params):
            break
    return names


class Configurable:
    """Mixin of an object whose `get_config()` holds its constructor's
    arguments (a sampler, a process), each kept under its name as an
    attribute: built again from it, shown by it."""

    def get_config(self):
        # A subclass whose `get_config` adds its own arguments to this one's
        # (`super().get_config()`) gets its base's: the first class up that
        # leaves `get_config` to its bases.
        owner = next(
            klass
            for klass in type(self).__mro__
            if "get_config" not in vars(klass) or klass is Configurable
        )
        names = constructor_arguments(owner)
        missing = [name for name in names if not hasattr(self, name)]
        if missing:
            raise NotImplementedError(
                f"{type(self).__name__} keeps no attribute for its constructor "
                f"arguments {missing}: store each under its name, or override "
                "`get_config`."
            )
        return {name: getattr(self, name) for name in names}

    @classmethod
    def from_config(cls, config):
        return cls(**config)

    def __repr__(self):
        args = ", ".join(f"{k}={_shown(v)}" for k, v in self.get_config().items())
        return f"{type(self).__name__}({args})"


def _shown(value):
    """A value's repr, a long list (a schedule's `trained_betas`) by its
    length: a repr goes into error messages."""
    if isinstance(value, (list, tuple)) and len(value) > 8:
        return f"<{len(value)} values>"
    return repr(value)


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
