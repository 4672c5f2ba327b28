// Shared by the C API files: the opaque handles and the exception guard.
#pragma once

#include <cstring>
#include <exception>
#include <memory>
#include <string>

#include "kiln.h"
#include "model/context.h"
#include "model/model.h"

struct kiln_model {
    std::unique_ptr<kiln::Model> model;
};

struct kiln_context {
    const kiln_model* owner = nullptr;
    std::unique_ptr<kiln::Context> ctx;
};

namespace kiln::api {

void set_last_error(std::string msg);
void clear_last_error();

// Runs f, converting exceptions into on_error and a last-error message.
template <typename F, typename R>
R guarded(F&& f, R on_error) {
    try {
        clear_last_error();
        return f();
    } catch (const std::exception& e) {
        set_last_error(e.what());
    } catch (...) {
        set_last_error("unknown error");
    }
    return on_error;
}

// snprintf-style copy: writes at most buf_size - 1 bytes plus NUL, returns the full length.
inline int32_t copy_out(const std::string& s, char* buf, size_t buf_size) {
    if (buf && buf_size > 0) {
        const size_t n = std::min(s.size(), buf_size - 1);
        std::memcpy(buf, s.data(), n);
        buf[n] = '\0';
    }
    return static_cast<int32_t>(s.size());
}

}  // namespace kiln::api
