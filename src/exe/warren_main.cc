// warren: the CLI and `warren serve`. One file per subcommand under src/cli/.
#include "cli/common.h"

int main(int argc, char** argv) {
  CLI::App app{"warren: sandboxes for training and evaluating AI agents"};
  app.require_subcommand(1);
  app.set_help_all_flag("--help-all");
  warren::cli::AddServe(app);
  warren::cli::AddImage(app);
  warren::cli::AddCreate(app);
  warren::cli::AddExec(app);
  warren::cli::AddRun(app);
  warren::cli::AddLs(app);
  warren::cli::AddInspect(app);
  warren::cli::AddRm(app);
  warren::cli::AddCp(app);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    if (e.get_exit_code() == 0) return app.exit(e);
    fprintf(stderr, "warren: %s\n", e.what());
    return 2;
  }
  return warren::cli::ExitCode();
}
