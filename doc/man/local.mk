# SPDX-License-Identifier: BSD-3-Clause
# doc/man: the man pages (hand-written nroff, committed), installed under share/man, and their lint test.
# Link pages (.so man3/<page>.3) let `man ddpc_allreduce` find the page that covers the call.
dist_man_MANS = \
	doc/man/trainer.1 \
	doc/man/ddpc-info.1 \
	doc/man/ddpc-ckpt.1 \
	doc/man/ddpc-flight.1 \
	doc/man/ddpc-timeline.1 \
	doc/man/ddpc.7 \
	doc/man/ddpc_init.3 \
	doc/man/ddpc_comm.3 \
	doc/man/ddpc_comm_split.3 \
	doc/man/ddpc_ddp.3 \
	doc/man/ddpc_optim.3 \
	doc/man/ddpc_ckpt.3 \
	doc/man/ddpc_sampler.3 \
	doc/man/ddpc_timeline.3
dist_man_MANS += \
	doc/man/ddpc_abort.3 \
	doc/man/ddpc_allreduce.3 \
	doc/man/ddpc_batchnorm_stats.3 \
	doc/man/ddpc_broadcast.3 \
	doc/man/ddpc_build_info.3 \
	doc/man/ddpc_ckpt_load.3 \
	doc/man/ddpc_ckpt_save.3 \
	doc/man/ddpc_comm_create.3 \
	doc/man/ddpc_comm_world.3 \
	doc/man/ddpc_ddp_create.3 \
	doc/man/ddpc_ddp_last_error.3 \
	doc/man/ddpc_ddp_wait.3 \
	doc/man/ddpc_device_select.3 \
	doc/man/ddpc_finalize.3 \
	doc/man/ddpc_gpu_rule.3 \
	doc/man/ddpc_idx_open.3 \
	doc/man/ddpc_kvs_allgather.3 \
	doc/man/ddpc_last_error.3 \
	doc/man/ddpc_loader_create.3 \
	doc/man/ddpc_optim_create.3 \
	doc/man/ddpc_optim_step.3 \
	doc/man/ddpc_runtime_info.3 \
	doc/man/ddpc_sampler_create.3 \
	doc/man/ddpc_strerror.3
# Every call in a section 3 page's NAME without a page of its own gets a
# symbolic link to that page at install, so that `man ddpc_ckpt_create` finds
# ddpc_ckpt(3) (mandoc -Tlint prefers links to .so stubs). The names come from
# the pages' NAME sections: the list cannot drift from them (tests/manpages.sh
# checks `man -w` for every DDPC_API call of include/).
install-data-hook: ddpc-install-manlinks
uninstall-hook: ddpc-uninstall-manlinks
.PHONY: ddpc-install-manlinks ddpc-uninstall-manlinks
ddpc-install-manlinks:
	@$(NORMAL_INSTALL)
	@for p in $(dist_man_MANS); do \
	  case $$p in *.3) ;; *) continue ;; esac; \
	  b=$$(basename "$$p"); \
	  head -n 1 "$(srcdir)/$$p" | grep -q '^\.so ' && continue; \
	  for n in $$(sed -n '/^\.SH NAME/,/^\.SH SYNOPSIS/p' "$(srcdir)/$$p" | grep -oE 'ddpc_[a-z0-9_]+'); do \
	    test -e "$(DESTDIR)$(man3dir)/$$n.3" && continue; \
	    echo " ln -s $$b $(DESTDIR)$(man3dir)/$$n.3"; \
	    ln -s "$$b" "$(DESTDIR)$(man3dir)/$$n.3" || exit 1; \
	  done; \
	done
ddpc-uninstall-manlinks:
	@$(NORMAL_UNINSTALL)
	@for p in $(dist_man_MANS); do \
	  case $$p in *.3) ;; *) continue ;; esac; \
	  for n in $$(sed -n '/^\.SH NAME/,/^\.SH SYNOPSIS/p' "$(srcdir)/$$p" | grep -oE 'ddpc_[a-z0-9_]+'); do \
	    if test -L "$(DESTDIR)$(man3dir)/$$n.3"; then rm -f "$(DESTDIR)$(man3dir)/$$n.3"; fi; \
	  done; \
	done
TESTS += tests/manpages.sh
dist_check_SCRIPTS += tests/manpages.sh
