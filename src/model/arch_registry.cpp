// The architectures kiln knows: one line each.
#include <array>

#include "model/arch.h"

namespace kiln {

const Architecture& llama_architecture();
const Architecture& qwen2_architecture();
const Architecture& gemma3_architecture();

namespace {
const std::array<const Architecture* (*)(), 3> kRegistry = {
    [] { return &llama_architecture(); },
    [] { return &qwen2_architecture(); },
    [] { return &gemma3_architecture(); },
};
}  // namespace

const Architecture* find_architecture(std::string_view name) {
    for (auto get : kRegistry) {
        if (get()->name() == name) return get();
    }
    return nullptr;
}

std::vector<std::string_view> architecture_names() {
    std::vector<std::string_view> out;
    for (auto get : kRegistry) out.push_back(get()->name());
    return out;
}

}  // namespace kiln
