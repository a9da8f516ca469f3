// templates.cpp: a template-heavy C++ translation unit for Debian's C++ compiler to chew on
// (bench/scripts/scaling.sh REAL=compiler): most of the standard library's headers, nested
// containers, variants, std::function, regex and filesystem instantiated. cc1plus -O2 takes
// about 4 s and 3.3 M allocations over ~125,000 distinct allocation stacks on it: a real
// program with many distinct stacks for the analysis (issue 50). Not meant to run.
#include <bits/stdc++.h>
#include <regex>
#include <variant>
#include <any>
#include <filesystem>
template <int N> struct Node { std::map<std::string, std::vector<Node<N-1>>> kids; std::variant<int, double, std::string> v; };
template <> struct Node<0> { int x; };
template <int N> size_t walk(const Node<N>& n) { size_t s = 0; for (auto& [k, v] : n.kids) for (auto& c : v) s += walk(c) + k.size(); return s; }
template <> size_t walk(const Node<0>& n) { return n.x; }
template <typename T, int K> struct Gen { static auto make() { std::unordered_map<T, std::function<std::optional<T>(T)>> m; std::sort((int*)nullptr, (int*)nullptr); return m; } };
#define G(T, K) auto g_##K = Gen<T, K>::make();
#define G10(T, b) G(T, b##0) G(T, b##1) G(T, b##2) G(T, b##3) G(T, b##4) G(T, b##5) G(T, b##6) G(T, b##7) G(T, b##8) G(T, b##9)
G10(int, 1) G10(long, 2) G10(std::string, 3) G10(short, 4) G10(unsigned, 5)
size_t use(const Node<6>& n) { return walk(n); }
std::regex r1("(a+)(b*)[cd]{2,5}"), r2("^\\s*(\\w+)\\s*=\\s*(.*)$");
std::vector<std::tuple<int, std::string, double>> sorted(std::vector<std::tuple<int, std::string, double>> v) { std::stable_sort(v.begin(), v.end()); return v; }
std::set<std::pair<std::string, std::map<int, std::list<double>>>> ss;
auto fs() { return std::filesystem::path("/a/b").filename(); }
int main() { return 0; }
