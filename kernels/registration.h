// TANDEM_REGISTER_AT_LOAD: registers one instance of a backend class when the library that uses the macro is
// loaded (static initialization; the library is alwayslink so that nothing else needs to refer to it).
#pragma once

// register_fn: register_backend or register_nn_backend; device_type: a DeviceType; Class: the backend class.
#define TANDEM_REGISTER_AT_LOAD(register_fn, device_type, Class) \
  namespace {                                                    \
  const bool registered = [] {                                   \
    static Class backend;                                        \
    register_fn(device_type, &backend);                          \
    return true;                                                 \
  }();                                                           \
  }
