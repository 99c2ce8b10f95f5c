/* placeholder: written next */
#include "postgres.h"
