from training.publicgpu.cli import main

raise SystemExit(main())
