// The console's script: asks /admin/api/overview with the operator's key and shows it.
"use strict";
