#pragma once
// The one umbrella include: everything a user of tessera needs.

#include "tessera/version.hpp"

#include "tessera/core/axis_type.hpp"
#include "tessera/core/diagnostics.hpp"
#include "tessera/core/dtype.hpp"
#include "tessera/core/fixed_string.hpp"
#include "tessera/core/mesh.hpp"
#include "tessera/core/named_sharding.hpp"
#include "tessera/core/partition_spec.hpp"
#include "tessera/core/sharding.hpp"
#include "tessera/core/single_device_sharding.hpp"
#include "tessera/core/slice.hpp"

#include "tessera/runtime/device_buffer.hpp"
#include "tessera/runtime/device_error.hpp"
#include "tessera/runtime/device_memory.hpp"
#include "tessera/runtime/device_pool.hpp"
#include "tessera/runtime/make_mesh.hpp"
#include "tessera/runtime/runtime.hpp"
#include "tessera/runtime/wait_policy.hpp"

#include "tessera/array/array.hpp"
#include "tessera/array/block_copy.hpp"
#include "tessera/array/device_put.hpp"
#include "tessera/array/make_array_from_callback.hpp"
#include "tessera/array/placement.hpp"
#include "tessera/array/shape.hpp"
#include "tessera/array/to_host.hpp"

#include "tessera/debug/typeof.hpp"
#include "tessera/debug/visualize_array_sharding.hpp"
