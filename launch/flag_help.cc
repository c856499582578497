#include "launch/flag_help.h"

#include <algorithm>
#include <cctype>
#include <sstream>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_replace.h"
#include "launch/job_config.h"

namespace syncline {
namespace {

// The groups of `app`'s options in help order: kFlagGroups first, then any other, in the order
// first seen. The empty group is CLI11's "hidden".
std::vector<std::string> OrderedGroups(const CLI::App& app) {
  std::vector<std::string> groups;
  for (FlagGroup group : kFlagGroups) groups.emplace_back(FlagGroupName(group));
  for (const std::string& group : app.get_groups()) {
    if (!group.empty() && std::find(groups.begin(), groups.end(), group) == groups.end()) {
      groups.push_back(group);
    }
  }
  return groups;
}

std::vector<const CLI::Option*> OptionsOf(const CLI::App& app, const std::string& group) {
  return app.get_options([&group](const CLI::Option* option) {
    return option->get_group() == group && option->nonpositional();
  });
}

class GroupedFormatter : public CLI::Formatter {
 public:
  std::string make_help(const CLI::App* app, std::string name,
                        CLI::AppFormatMode mode) const override {
    if (mode == CLI::AppFormatMode::Sub) return make_expanded(app);
    std::stringstream out;
    out << make_description(app) << make_usage(app, name) << make_positionals(app);
    for (const std::string& group : OrderedGroups(*app)) {
      const std::vector<const CLI::Option*> options = OptionsOf(*app, group);
      if (!options.empty()) out << make_group(group, false, options);
    }
    out << make_subcommands(app, mode) << '\n' << make_footer(app);
    return out.str();
  }
};

// A table cell: one line, pipes escaped.
std::string Cell(const std::string& text) {
  return absl::StrReplaceAll(text, {{"|", "\\|"}, {"\n", " "}});
}

// "job" for "Job", "checkpoints-and-faults" for "Checkpoints and faults": GitHub's anchors.
std::string Anchor(const std::string& heading) {
  std::string anchor;
  for (char c : heading) {
    if (c == ' ') {
      anchor += '-';
    } else if (std::isalnum(static_cast<unsigned char>(c))) {
      anchor += static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    }
  }
  return anchor;
}

}  // namespace

std::shared_ptr<CLI::Formatter> GroupedHelpFormatter() {
  return std::make_shared<GroupedFormatter>();
}

std::string OptionsMarkdownTable(const std::vector<const CLI::Option*>& options,
                                 bool job_file_keys) {
  std::string md = job_file_keys
                       ? "| flag | value | default | job file | meaning |\n| --- | --- | --- | --- "
                         "| --- |\n"
                       : "| flag | value | default | meaning |\n| --- | --- | --- | --- |\n";
  for (const CLI::Option* option : options) {
    const std::string key = option->get_lnames().empty() ? "" : option->get_lnames().front();
    const std::string name = key.empty() ? option->get_name() : "--" + key;
    const std::string value = option->get_type_size() == 0 ? "" : option->get_type_name();
    const std::string fallback = option->get_default_str();
    absl::StrAppend(&md, "| `", name, "` | ", Cell(value), " | ",
                    fallback.empty() ? "" : absl::StrCat("`", Cell(fallback), "`"), " | ",
                    !job_file_keys      ? ""
                    : IsJobFileKey(key) ? absl::StrCat("`", key, "` | ")
                                        : " | ",
                    Cell(option->get_description()), " |\n");
  }
  return md;
}

std::string FlagsMarkdown(const CLI::App& app, const std::string& intro, const std::string& outro) {
  std::string md = intro;
  std::vector<std::string> contents;
  for (const std::string& group : OrderedGroups(app)) {
    if (!OptionsOf(app, group).empty()) {
      contents.push_back(absl::StrCat("[", group, "](#", Anchor(group), ")"));
    }
  }
  absl::StrAppend(&md, "Sections: ", absl::StrJoin(contents, " · "), ".\n");
  for (const std::string& group : OrderedGroups(app)) {
    const std::vector<const CLI::Option*> options = OptionsOf(app, group);
    if (options.empty()) continue;
    absl::StrAppend(&md, "\n## ", group, "\n\n", OptionsMarkdownTable(options));
  }
  absl::StrAppend(&md, outro);
  return md;
}

}  // namespace syncline
