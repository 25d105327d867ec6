#include "sql.h"
